"""The `trtkit` command line: one module per command group, thin wrappers over the library."""
