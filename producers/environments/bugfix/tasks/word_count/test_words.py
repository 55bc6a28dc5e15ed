from words import word_counts


def test_counts():
    assert word_counts("a b a") == {"a": 2, "b": 1}


def test_case_is_ignored():
    assert word_counts("The cat saw the dog") == {"the": 2, "cat": 1, "saw": 1, "dog": 1}
