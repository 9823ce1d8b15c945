from intervals.merge import merge
