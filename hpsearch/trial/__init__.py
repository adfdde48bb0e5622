"""The trial side: the context a training function gets, the worker that runs it, the protocol."""
