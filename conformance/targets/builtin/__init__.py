"""Built-in target files: impl's store in a declared configuration, loaded
as ``file:`` targets by name (:func:`~shmspec.conformance.targets.loader.load_target`).
Never imported as part of this package."""
