"""Stages chained: the one-command quickstart (config -> checkpoint -> engine slot -> repository -> check ->
tritonserver -> a streamed answer), over the stage packages; the CLI is a thin layer over it."""
