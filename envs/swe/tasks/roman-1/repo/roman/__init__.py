from roman.numerals import to_roman
