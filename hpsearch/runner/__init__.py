"""Running trials on Ray Tune: cluster connection, the searcher and callback adapters, the tuner."""
