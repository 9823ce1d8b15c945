"""Parse URL query strings into dicts (last value wins)."""


def parse_query(query):
    result = {}
    for pair in query.lstrip("?").split("&"):
        if not pair:
            continue
        key, _, value = pair.partition("=")
        result[key] = value
    return result
