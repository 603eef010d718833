"""The foundation: errors, ids, digests, vocabulary, paths, crash-safe files, signals
and processes; standard library only, or nearly."""
