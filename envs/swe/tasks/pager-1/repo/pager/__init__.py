from pager.core import Paginator
