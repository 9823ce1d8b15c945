from casing.convert import camel_to_snake
