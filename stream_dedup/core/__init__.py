"""The pure core: text preparation, fingerprints, detectors, state, verdicts. No Kafka, no Faust.

Everything that decides whether a page is a duplicate lives here, so that the embedded ``scan``
and the Kafka workers give the same answers: the stream package only moves messages between
these functions across partitions.
"""
