"""The vocabulary: topologies, scenarios, links, PEP placements, host profiles, parameters."""
