"""The commands on top of every floor: each parses its arguments and drives the floors below."""
