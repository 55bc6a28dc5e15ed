from intervals import merge


def test_sorted():
    assert merge([(1, 3), (2, 6), (8, 10)]) == [(1, 6), (8, 10)]


def test_unsorted():
    assert merge([(8, 10), (1, 3), (2, 6)]) == [(1, 6), (8, 10)]
