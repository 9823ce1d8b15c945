from qs.query import parse_query
