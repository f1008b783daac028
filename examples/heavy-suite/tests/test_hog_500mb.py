def test_hog_500mb():
    """Touches 500 MiB, like a test that materialises a checkpoint-sized tensor."""
    block = bytearray(500 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    assert block[0] == 1
    del block
