// bloomery chat: C-locale strftime for templates' `strftime_now` and llama's date context variables.

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS = [
  "January", "February", "March", "April", "May", "June",
  "July", "August", "September", "October", "November", "December",
];

function pad(n: number, width: number, fill: string): string {
  let s = String(n);
  while (s.length < width) s = fill + s;
  return s;
}

function dayOfYear(d: Date): number {
  const start = new Date(d.getFullYear(), 0, 1);
  const ms = new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime() - start.getTime();
  return Math.round(ms / 86_400_000) + 1;
}

function tzOffset(d: Date): string {
  const off = -d.getTimezoneOffset();
  const sign = off >= 0 ? "+" : "-";
  const a = Math.abs(off);
  return `${sign}${pad(Math.floor(a / 60), 2, "0")}${pad(a % 60, 2, "0")}`;
}

function tzName(d: Date): string {
  if (d.getTimezoneOffset() === 0) return "UTC";
  const part = new Intl.DateTimeFormat("en-US", { timeZoneName: "short" })
    .formatToParts(d)
    .find((p) => p.type === "timeZoneName");
  return part?.value ?? tzOffset(d);
}

/**
 * Formats `date` in local time the way C's `strftime` does in the "C" locale (what llama.cpp's
 * `strftime_now` gives). Supports the POSIX conversions plus glibc's `-` (no padding) flag;
 * an unknown conversion is copied through unchanged.
 */
export function strftime(date: Date, format: string): string {
  let out = "";
  for (let i = 0; i < format.length; i++) {
    const c = format[i];
    if (c !== "%" || i + 1 >= format.length) {
      out += c;
      continue;
    }
    let spec = format[++i];
    let noPad = false;
    if (spec === "-" && i + 1 < format.length) {
      noPad = true;
      spec = format[++i];
    }
    const num = (n: number, width: number, fill = "0") => (noPad ? String(n) : pad(n, width, fill));
    const h12 = date.getHours() % 12 === 0 ? 12 : date.getHours() % 12;
    switch (spec) {
      case "a": out += DAYS[date.getDay()].slice(0, 3); break;
      case "A": out += DAYS[date.getDay()]; break;
      case "b": case "h": out += MONTHS[date.getMonth()].slice(0, 3); break;
      case "B": out += MONTHS[date.getMonth()]; break;
      case "c": out += strftime(date, "%a %b %e %H:%M:%S %Y"); break;
      case "C": out += num(Math.floor(date.getFullYear() / 100), 2); break;
      case "d": out += num(date.getDate(), 2); break;
      case "D": out += strftime(date, "%m/%d/%y"); break;
      case "e": out += num(date.getDate(), 2, " "); break;
      case "F": out += strftime(date, "%Y-%m-%d"); break;
      case "H": out += num(date.getHours(), 2); break;
      case "I": out += num(h12, 2); break;
      case "j": out += num(dayOfYear(date), 3); break;
      case "k": out += num(date.getHours(), 2, " "); break;
      case "l": out += num(h12, 2, " "); break;
      case "m": out += num(date.getMonth() + 1, 2); break;
      case "M": out += num(date.getMinutes(), 2); break;
      case "n": out += "\n"; break;
      case "p": out += date.getHours() < 12 ? "AM" : "PM"; break;
      case "r": out += strftime(date, "%I:%M:%S %p"); break;
      case "R": out += strftime(date, "%H:%M"); break;
      case "S": out += num(date.getSeconds(), 2); break;
      case "t": out += "\t"; break;
      case "T": out += strftime(date, "%H:%M:%S"); break;
      case "u": out += String(date.getDay() === 0 ? 7 : date.getDay()); break;
      case "w": out += String(date.getDay()); break;
      case "x": out += strftime(date, "%m/%d/%y"); break;
      case "X": out += strftime(date, "%H:%M:%S"); break;
      case "y": out += num(date.getFullYear() % 100, 2); break;
      case "Y": out += String(date.getFullYear()); break;
      case "z": out += tzOffset(date); break;
      case "Z": out += tzName(date); break;
      case "%": out += "%"; break;
      default: out += (noPad ? "%-" : "%") + spec;
    }
  }
  return out;
}
