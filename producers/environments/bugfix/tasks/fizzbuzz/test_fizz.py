from fizz import fizzbuzz


def test_numbers():
    assert fizzbuzz(1) == "1"


def test_fizz_and_buzz():
    assert fizzbuzz(9) == "Fizz"
    assert fizzbuzz(10) == "Buzz"


def test_fizzbuzz():
    assert fizzbuzz(30) == "FizzBuzz"
