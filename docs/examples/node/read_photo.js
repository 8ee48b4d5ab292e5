// Reads the latest window of a session, then the first photo it references,
// from the Scrollback history and media services.
//
//   node read_photo.js SESSION OUT_FILE [HISTORY_ADDR] [MEDIA_ADDR]
//
// The .proto files are loaded at run time from SCROLLBACK_PROTOS, else the
// first of ./protos beside this script, the checkout's protos/ this script
// sits in (../../../protos), and ./protos of the working directory; with none
// there it says so in one line and exits 2. Prints one JSON line: the entries read, the ref and
// the bytes written. On a failed call it prints the status code and the
// error's reason (google.rpc.ErrorInfo) as one JSON line on stderr, exit 1.
"use strict";

const fs = require("fs");
const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const protobuf = require("protobufjs");

// proto-loader drops custom options, so the marker is the literal from the
// comments of scrollback/ref/v1/options.proto.
const STRIPPED_MEDIA_MARKER = "[scrollback:stripped-media]";

const [session, outFile, historyAddr = "127.0.0.1:50051", mediaAddr = "127.0.0.1:50052"] =
  process.argv.slice(2);
const HISTORY_PROTO = "scrollback/history/v1/history.proto";
const protoDirs = process.env.SCROLLBACK_PROTOS
  ? [process.env.SCROLLBACK_PROTOS]
  : [path.join(__dirname, "protos"), path.join(__dirname, "..", "..", "..", "protos"),
     path.join(process.cwd(), "protos")];
const protos = protoDirs.find((dir) => fs.existsSync(path.join(dir, HISTORY_PROTO)));
if (!protos) {
  const where = process.env.SCROLLBACK_PROTOS ? "in SCROLLBACK_PROTOS" : "beside this script";
  console.error(`read_photo: no Scrollback .proto files ${where}; set SCROLLBACK_PROTOS to ` +
    "the protos/ directory of a Scrollback checkout");
  process.exit(2);
}

const definition = protoLoader.loadSync(
  [HISTORY_PROTO, "scrollback/media/v1/media.proto"],
  // longs as strings: offsets and sizes are uint64
  { includeDirs: [protos], keepCase: true, longs: String, enums: String, defaults: true },
);
const api = grpc.loadPackageDefinition(definition);
const history = new api.scrollback.history.v1.HistoryService(
  historyAddr, grpc.credentials.createInsecure());
const media = new api.scrollback.media.v1.MediaService(
  mediaAddr, grpc.credentials.createInsecure());

// google.rpc.Status and ErrorInfo, the rich error model: every Scrollback error
// carries one ErrorInfo in the "grpc-status-details-bin" trailer. Their .proto
// files ship beside Scrollback's (protos/google/rpc/); protobufjs bundles the
// google/protobuf ones they import.
const richErrors = new protobuf.Root();
richErrors.resolvePath = (origin, target) =>
  target.startsWith("google/protobuf/") ? target : path.join(protos, target);
richErrors.loadSync(["google/rpc/status.proto", "google/rpc/error_details.proto"], { keepCase: true });
const Status = richErrors.lookupType("google.rpc.Status");
const ErrorInfo = richErrors.lookupType("google.rpc.ErrorInfo");

// The reason of a failed call ("PIN_MISMATCH", "SESSION_NOT_FOUND", ...), or "".
function reasonOf(error) {
  const [raw] = (error.metadata && error.metadata.get("grpc-status-details-bin")) || [];
  if (!raw) return "";
  for (const detail of Status.decode(raw).details) {
    if (detail.type_url.endsWith("/google.rpc.ErrorInfo")) {
      const info = ErrorInfo.decode(detail.value);
      if (info.domain === "scrollback") return info.reason;
    }
  }
  return "";
}

function readWindow(sessionId) {
  return new Promise((resolve, reject) => {
    const entries = [];
    // max_batch_bytes: small entries come several to a message (EntryBatch).
    const call = history.ReadWindow({ session_id: sessionId, page_size: 50, max_batch_bytes: 1048576 });
    call.on("data", (message) => {
      // A window streams entries (alone or in batches), continuations of long
      // json texts (only after an entry sent alone), then its end.
      if (message.entry) entries.push(message.entry);
      else if (message.entries) entries.push(...message.entries.entries);
      else if (message.entry_json_chunk) entries[entries.length - 1].json += message.entry_json_chunk.json_part;
    });
    call.on("error", reject);
    call.on("end", () => resolve(entries));
  });
}

function readMedia(ref) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let metadata = null;
    // `index` may be absent in JSON forms of a ref: absent means 0.
    const call = media.ReadMedia({ media: { media_ref: { ...ref, index: ref.index || 0 } } });
    call.on("data", (message) => {
      if (message.metadata) metadata = message.metadata;
      else chunks.push(message.data);
    });
    call.on("error", reject);
    call.on("end", () => resolve({ metadata, data: Buffer.concat(chunks) }));
  });
}

async function main() {
  const entries = await readWindow(session);
  const withPhoto = entries.find((entry) => entry.media_refs.length > 0);
  if (!withPhoto) throw new Error("no photo in the latest window");
  if (!withPhoto.json.includes(STRIPPED_MEDIA_MARKER)) throw new Error("no marker in the entry");
  const ref = withPhoto.media_refs[0];
  const photo = await readMedia(ref);
  fs.writeFileSync(outFile, photo.data);
  console.log(JSON.stringify({
    entries: entries.length,
    ref: ref.uri,
    content_type: photo.metadata.content_type,
    sha256: photo.metadata.sha256,
    bytes: photo.data.length,
  }));
}

main().then(
  () => { history.close(); media.close(); },
  (error) => {
    if (error.code !== undefined) {
      console.error(JSON.stringify({ code: grpc.status[error.code], reason: reasonOf(error), message: error.details }));
    } else {
      console.error(`read_photo: ${error.message}`);
    }
    process.exit(1);
  },
);
