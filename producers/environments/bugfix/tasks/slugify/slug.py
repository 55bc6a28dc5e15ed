import re


def slugify(title: str) -> str:
    """'Hello,  World!' -> 'hello-world'."""
    cleaned = re.sub(r"[^a-z0-9 ]", "", title.lower())
    return cleaned.replace(" ", "-")
