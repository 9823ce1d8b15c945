from iniparse.reader import parse
