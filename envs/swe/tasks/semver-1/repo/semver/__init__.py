from semver.version import compare, latest
