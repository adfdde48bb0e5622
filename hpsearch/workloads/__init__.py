"""Built-in training functions, usable as ``train: hpsearch.workloads.<name>:train``."""
