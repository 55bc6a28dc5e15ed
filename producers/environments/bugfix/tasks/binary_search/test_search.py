from search import find


def test_found():
    assert find([1, 3, 5, 7], 3) == 1


def test_last_element():
    assert find([1, 3, 5, 7], 7) == 3


def test_single():
    assert find([4], 4) == 0


def test_missing():
    assert find([1, 3, 5], 4) == -1
