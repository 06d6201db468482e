"""The emit stage: a `Schedule` -> token-ordered instruction streams per engine, the packed
constants and the binary's metadata (one `TslProgram`)."""
