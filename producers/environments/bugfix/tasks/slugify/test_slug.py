from slug import slugify


def test_simple():
    assert slugify("Hello World") == "hello-world"


def test_punctuation_is_dropped():
    assert slugify("Hello, World!") == "hello-world"


def test_runs_of_spaces_give_one_dash():
    assert slugify("  many   spaces here ") == "many-spaces-here"
