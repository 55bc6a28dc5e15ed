import pytest

from stats import median


def test_odd():
    assert median([3, 1, 2]) == 2


def test_even_is_the_mean_of_the_middle_two():
    assert median([4, 1, 3, 2]) == 2.5


def test_empty_is_an_error():
    with pytest.raises(ValueError):
        median([])
