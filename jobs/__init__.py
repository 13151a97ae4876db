"""Job definitions: each job kind is a FLARE Job API definition that carries configuration only, never code."""
