from utf8trunc.trunc import truncate_bytes
