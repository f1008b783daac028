import os


def test_settings_init():
    """Sets the secret as a side effect, like the report's setup_jwt_secret."""
    os.environ["APP_SECRET"] = "s3cret"
    assert os.environ["APP_SECRET"]
