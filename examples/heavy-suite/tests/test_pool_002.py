import pytest

from conftest import burn


@pytest.mark.parametrize("i", range(4))
def test_with_pool(cpu_pool, i):
    assert all(p.poll() is None for p in cpu_pool)
    burn(40)
