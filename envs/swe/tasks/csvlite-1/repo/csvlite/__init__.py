from csvlite.parse import split_row
