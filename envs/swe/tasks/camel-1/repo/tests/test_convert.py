from casing import camel_to_snake


def test_simple():
    assert camel_to_snake("camelCase") == "camel_case"


def test_pascal():
    assert camel_to_snake("PascalCase") == "pascal_case"
