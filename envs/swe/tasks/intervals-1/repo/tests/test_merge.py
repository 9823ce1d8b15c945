from intervals import merge


def test_overlap():
    assert merge([(1, 4), (2, 6)]) == [(1, 6)]


def test_disjoint():
    assert merge([(1, 2), (4, 5)]) == [(1, 2), (4, 5)]
