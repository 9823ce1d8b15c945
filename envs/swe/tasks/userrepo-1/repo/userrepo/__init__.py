from userrepo.repo import UserRepo
