from durations.parse import parse_duration
