from slugkit.slug import slugify

__all__ = ["slugify"]
