import os


def test_token_signing():
    """Silently depends on test_settings.py having run first in this process."""
    secret = os.environ.get("APP_SECRET")
    assert secret, "APP_SECRET not set: this test depends on an earlier one"
