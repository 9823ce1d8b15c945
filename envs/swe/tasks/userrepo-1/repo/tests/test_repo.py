from userrepo import UserRepo


def test_cached_reads():
    repo = UserRepo({1: {"name": "Al"}})
    assert repo.get_user(1)["name"] == "Al"
    repo.get_user(1)
    assert repo.store_reads == 1
