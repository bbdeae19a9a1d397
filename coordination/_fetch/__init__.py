"""The lean record fetcher's engine: Fetch requests on connections the caller's thread drives.

Internal, no compatibility guarantee; :mod:`coordination.fetching` is its public face.
"""
