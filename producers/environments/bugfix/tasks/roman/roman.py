_NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(number: int) -> str:
    if not 0 < number < 4000:
        raise ValueError("1 to 3999")
    out = []
    for value, numeral in _NUMERALS:
        while number >= value:
            out.append(numeral)
            number -= value
    return "".join(out)
