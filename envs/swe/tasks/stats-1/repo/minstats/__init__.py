from minstats.center import mean, median
