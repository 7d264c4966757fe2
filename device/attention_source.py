# Device (MicroPython; also runs unchanged under CPython): where a Stream's steps come from.
"""Sources of steps for attention_stream.Stream: the protocol, a replay file, IMU drivers.

A source has `C` (values per step) and one of two methods:

    read(buf) -> steps   # fill bytearray buf with up to len(buf) // (4*C) steps of float32
                         # little-endian (a FIFO read); 0 when the source has ended
    step() -> values     # one step of C numbers, when it is due; None when ended

A user's own sensor in five lines:

    class Light:
        C = 1
        def step(self):
            time.sleep_ms(100)            # 10 Hz
            return (adc.read_u16(),)

`feed(stream, source, buf)` takes either kind (Stream.push_block or Stream.push).

- `Replay(path, rate=None, loop=False)`: plays a replay file (docs/protocol.md "Replay file":
  "TASR", version, C, steps, rate, then float32 steps) block by block, paced by
  time.ticks_us at its rate (or `rate`; 0: as fast as it reads), so virtual boards and tests
  run the real loop.
- `IMU(driver, rate, gyro=True)`: a micropython-lib IMU driver (`mip install lsm6dsox`,
  `bmi270`, `lsm9ds1`), whose `accel()` and `gyro()` give (x, y, z) tuples, as steps of
  ax, ay, az[, gx, gy, gz] at `rate` Hz. `open_imu(name, i2c)` imports the driver and
  builds it (LSM6DSOX(i2c), BMI270(i2c), LSM9DS1(i2c)).
- `open_source(spec, i2c=None)`: "replay:FILE[@RATE]" or "imu:NAME[@RATE]" -> a source;
  ValueError / OSError with one line naming the problem.

References: DESIGN §12; micropython-lib drivers/sensor (lsm6dsox, bmi270, lsm9ds1: accel(),
gyro() in g and dps); emlearn-micropython's HAR example (a FIFO read per hop).
"""

import struct

try:
    from time import sleep_us, ticks_add, ticks_diff, ticks_us
except ImportError:  # CPython
    from time import perf_counter_ns, sleep

    def ticks_us():
        return perf_counter_ns() // 1000

    def ticks_add(a, b):
        return a + b

    def ticks_diff(a, b):
        return a - b

    def sleep_us(us):
        sleep(us / 1e6)


MAGIC = b"TASR"
VERSION = 1
HEADER = 16  # "<4sHHIf": magic, version, C, steps, rate (Hz, float32)
IMUS = {"lsm6dsox": "LSM6DSOX", "bmi270": "BMI270", "lsm9ds1": "LSM9DS1"}


class Pacer:
    """Waits until `n` more steps at `rate` Hz are due (0: never waits); integer µs ticks."""

    def __init__(self, rate):
        self.period = int(1000000 / rate) if rate else 0  # µs per step
        self.due = ticks_us()

    def wait(self, n):
        if not self.period:
            return
        self.due = ticks_add(self.due, n * self.period)
        late = ticks_diff(ticks_us(), self.due)
        if late < 0:
            sleep_us(-late)
        elif late > 1000000:  # more than a second behind (a pause): start again from now
            self.due = ticks_us()


class Replay:
    """The steps of a replay file, block by block; `loop`: start again at its end."""

    def __init__(self, path, rate=None, loop=False):
        self.path = path
        self.loop = loop
        self._f = open(path, "rb")
        head = self._f.read(HEADER)
        if len(head) < HEADER or head[:4] != MAGIC:
            raise ValueError("%s: not a replay file (no TASR header)" % path)
        version, C, n, file_rate = struct.unpack("<HHIf", head[4:])
        if version != VERSION:
            raise ValueError("%s: unsupported replay version %d" % (path, version))
        self.C = C
        self.steps = n
        self.rate = file_rate if rate is None else rate
        self._pacer = Pacer(self.rate)
        self._one = bytearray(4 * C)

    def read(self, buf):
        size = 4 * self.C
        k = self._f.readinto(buf)
        if not k and self.loop and self.steps:
            self._f.seek(HEADER)
            k = self._f.readinto(buf)
        n = (k or 0) // size
        self._pacer.wait(n)
        return n

    def step(self):
        if not self.read(self._one):
            return None
        return struct.unpack("<%df" % self.C, self._one)

    def close(self):
        self._f.close()


class IMU:
    """Steps ax, ay, az[, gx, gy, gz] of a driver with accel() / gyro() tuples, at `rate` Hz."""

    def __init__(self, driver, rate, gyro=True):
        self.driver = driver
        self.gyro = gyro
        self.C = 6 if gyro else 3
        self.rate = rate
        self._pacer = Pacer(rate)

    def step(self):
        self._pacer.wait(1)
        a = self.driver.accel()
        if not self.gyro:
            return (a[0], a[1], a[2])
        g = self.driver.gyro()
        return (a[0], a[1], a[2], g[0], g[1], g[2])

    def read(self, buf):
        n = len(buf) // (4 * self.C)
        for i in range(n):
            v = self.step()
            for c in range(self.C):
                struct.pack_into("<f", buf, 4 * (i * self.C + c), v[c])
        return n


def open_imu(name, i2c, **kwargs):
    """The micropython-lib driver `name` on bus `i2c` (kwargs go to its constructor)."""
    if name not in IMUS:
        raise ValueError("unknown IMU %r (known: %s)" % (name, ", ".join(sorted(IMUS))))
    try:
        module = __import__(name)
    except ImportError:
        raise ValueError(
            "IMU driver %s not installed: 'mpremote mip install %s'" % (name, name)
        ) from None
    try:
        return getattr(module, IMUS[name])(i2c, **kwargs)
    except OSError as exc:  # nothing answers at the driver's address
        raise OSError(
            "IMU %s not found on the I2C bus (%s); check wiring and address" % (name, exc)
        ) from None


def parse_source(spec, i2c=None):
    """(kind, where, rate or None) of "replay:FILE[@RATE]" or "imu:NAME[@RATE]"; ValueError
    for a spec that cannot open (checked before anything is opened or loaded)."""
    kind, _, rest = spec.partition(":")
    where, _, rate = rest.partition("@")
    try:
        rate = float(rate) if rate else None
    except ValueError:
        raise ValueError("source %r: rate %r is not a number" % (spec, rate)) from None
    if kind == "imu" and where and i2c is None:
        raise ValueError("source %r needs an I2C bus (app.json 'i2c': [id, scl, sda])" % spec)
    if kind not in ("replay", "imu") or not where:
        raise ValueError("source %r: expected 'replay:FILE[@HZ]' or 'imu:NAME[@HZ]'" % (spec,))
    return kind, where, rate


def open_source(spec, i2c=None, loop=True):
    """A source from "replay:FILE[@RATE]" or "imu:NAME[@RATE]" (RATE in Hz; imu default 50);
    i2c: a machine.I2C, or [id, scl, sda] to make one."""
    kind, where, rate = parse_source(spec, i2c)
    if kind == "replay":
        return Replay(where, rate, loop)
    if isinstance(i2c, (list, tuple)):  # [id, scl, sda] (app.json, tinyattn record --i2c)
        i2c = i2c_bus(*i2c)
    return IMU(open_imu(where, i2c), 50 if rate is None else rate)


def i2c_bus(bus, scl, sda):
    """machine.I2C(bus, scl=Pin(scl), sda=Pin(sda)); ValueError on a board without one."""
    try:
        from machine import I2C, Pin
    except ImportError:  # the unix port (the virtual board): machine has no I2C
        raise ValueError(
            "this board has no I2C bus (machine.I2C), so no IMU can be read here: use "
            "--source replay:FILE (a .ts file's windows played as a sensor)"
        ) from None
    return I2C(bus, scl=Pin(scl), sda=Pin(sda))


def feed(stream, source, buf):
    """One read of `source` into `stream`: a block into buf (read) or one step (step).
    Returns the decisions made, or -1 when the source has ended."""
    if hasattr(source, "read"):
        n = source.read(buf)
        return stream.push_block(buf, n) if n else -1
    v = source.step()
    return -1 if v is None else (1 if stream.push(v) else 0)
