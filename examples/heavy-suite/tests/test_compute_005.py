import pytest

from conftest import burn


@pytest.mark.parametrize("i", range(9))
def test_compute(i):
    assert burn(30) >= 0
