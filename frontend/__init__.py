"""Front ends: each parses one input language into the gramkiln IR and only into the IR."""
