"""Where a testbed is realized: namespaces (Mininet), Docker, Ansible; the programs run on nodes."""
