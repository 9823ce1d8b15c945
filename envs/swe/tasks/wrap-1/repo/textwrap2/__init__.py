from textwrap2.wrap import wrap
