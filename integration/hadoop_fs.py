"""Small files on any Hadoop filesystem, through the JVM of a Spark session: the markers of
``exactly_once_sink`` live beside the data Spark's writers put there, on the same filesystem
with the same configuration (``file://``, ``hdfs://``, ``s3a://`` with hadoop-aws, ...).

PySpark has no Python API for Hadoop's ``FileSystem``; this is the one module that reaches
it, through PySpark's py4j gateway (``SparkContext._jvm``), with public Hadoop calls only.
"""
from __future__ import annotations

from typing import Any, Optional


class HadoopFS:
    """The filesystem of ``root`` (a URI or a local path) and paths relative to it."""

    def __init__(self, spark: Any, root: str):
        sc = spark.sparkContext
        self._jvm = sc._jvm
        path = self._jvm.org.apache.hadoop.fs.Path(root)
        self.fs = path.getFileSystem(sc._jsc.hadoopConfiguration())
        self.root = self.fs.makeQualified(path)
        self.uri = self.root.toString()

    def path(self, rel: str = "") -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self.uri + ("/" + rel if rel else ""))

    def url(self, rel: str = "") -> str:
        """The full URI of ``rel`` (for Spark's readers and writers)."""
        return self.path(rel).toString()

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))

    def create(self, rel: str, data: bytes, overwrite: bool = False) -> bool:
        """Write a small file in one stream; False when it exists (and not ``overwrite``).
        Readers see it whole or not at all where the filesystem makes a file visible on
        close (HDFS, S3); locally it is written next to its name and renamed into place."""
        target = self.path(rel)
        if not overwrite and self.fs.exists(target):
            return False
        tmp = self.path(rel + ".tmp")
        out = self.fs.create(tmp, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        if overwrite and self.fs.exists(target):
            self.fs.delete(target, False)
        if not self.fs.rename(tmp, target):
            self.fs.delete(tmp, False)
            return False
        return True

    def read(self, rel: str) -> Optional[bytes]:
        """A small file's bytes, None when it does not exist."""
        p = self.path(rel)
        if not self.fs.exists(p):
            return None
        stream = self.fs.open(p)
        try:
            size = self.fs.getFileStatus(p).getLen()
            buf = self._jvm.java.io.ByteArrayOutputStream()
            self._jvm.org.apache.hadoop.io.IOUtils.copyBytes(stream, buf, max(4096, size),
                                                              False)
            return bytes(buf.toByteArray())
        finally:
            stream.close()

    def list(self, rel: str) -> list:
        """The names under ``rel`` (files and directories; [] when it does not exist)."""
        p = self.path(rel)
        if not self.fs.exists(p):
            return []
        return sorted(s.getPath().getName() for s in self.fs.listStatus(p))

    def delete(self, rel: str) -> None:
        self.fs.delete(self.path(rel), True)

    def rename(self, src: str, dst: str) -> bool:
        return bool(self.fs.rename(self.path(src), self.path(dst)))

    def mkdirs(self, rel: str) -> None:
        self.fs.mkdirs(self.path(rel))
