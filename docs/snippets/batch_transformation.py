"""A vectorized transformation: a whole Arrow batch in, a batch out; Connect's errors still per record."""

import pyarrow as pa
import pyarrow.compute as pc

from airflow_kerr.spark.stages import batch_transformation


@batch_transformation
def validate(batch: pa.RecordBatch) -> pa.RecordBatch:
    amounts = pc.struct_field(batch.column("value"), "amount")
    if not pc.all(pc.greater(amounts, 0)).as_py():
        raise ValueError("order with a non-positive amount")
    return batch  # or batch.filter(mask): rows left out are dropped on purpose
