"""Examples of the library in use; each file runs on its own (see its docstring)."""
