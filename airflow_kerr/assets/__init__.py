"""Assets for DLQs and tolerance events, with the apache-kafka provider's ``kafka://`` URIs."""
