from memo.cache import memoize
