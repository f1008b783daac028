def test_hog_300mb():
    """Touches 300 MiB, like a test that materialises a checkpoint-sized tensor."""
    block = bytearray(300 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    assert block[0] == 1
    del block
