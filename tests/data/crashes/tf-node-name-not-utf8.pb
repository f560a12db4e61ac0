

aÿcNoOp