import pytest

from conftest import burn


@pytest.mark.parametrize("i", range(8))
def test_compute(i):
    assert burn(45) >= 0
