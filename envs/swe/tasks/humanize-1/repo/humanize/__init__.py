from humanize.sizes import format_bytes
