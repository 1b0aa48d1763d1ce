"""Record formats below the job: Confluent's wire format, Avro / Protobuf / JSON Schema through a Schema Registry."""

# Imports only errors/ of ours: this package runs on Spark executors and in the replay, with no Airflow.

from airflow_kerr.formats.deserializer import RegistryDeserializer
from airflow_kerr.formats.exceptions import (
    ConverterDataError,
    ConverterRetriableError,
    RegistryRequestError,
    RegistryUnavailable,
    SerializationError,
)
from airflow_kerr.formats.registry_client import RegistryClient, registry_client_for
from airflow_kerr.formats.registry_settings import FORMATS, RegistrySettings
from airflow_kerr.formats.schema_cache import SchemaCache
from airflow_kerr.formats.serializer import RegistrySerializer
from airflow_kerr.formats.wire_format import WireFormat

__all__ = [
    "FORMATS",
    "ConverterDataError",
    "ConverterRetriableError",
    "RegistryClient",
    "RegistryDeserializer",
    "RegistryRequestError",
    "RegistrySerializer",
    "RegistrySettings",
    "RegistryUnavailable",
    "SchemaCache",
    "SerializationError",
    "WireFormat",
    "registry_client_for",
]
