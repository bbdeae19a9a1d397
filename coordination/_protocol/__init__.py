"""The wire layer: group request/response messages and Kafka error codes.

Internal, no compatibility guarantee. The engine speaks these small frozen
dataclasses; a transport translates them to and from Kafka's wire format.
"""
