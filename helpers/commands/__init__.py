"""One module per CLI command; `helpers.__main__` discovers them."""
