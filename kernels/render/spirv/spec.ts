// SPIR-V numbers this renderer uses (from the SPIR-V 1.6 unified headers and GLSL.std.450), by name.
// Only what the kernel IR needs; the values are the specification's.

export const MAGIC = 0x07230203;
/** SPIR-V 1.3: the version every Vulkan 1.1 device accepts. */
export const VERSION_1_3 = 0x00010300;

export const Op = {
  Name: 5,
  MemberName: 6,
  Extension: 10,
  ExtInstImport: 11,
  ExtInst: 12,
  MemoryModel: 14,
  EntryPoint: 15,
  ExecutionMode: 16,
  Capability: 17,
  TypeVoid: 19,
  TypeBool: 20,
  TypeInt: 21,
  TypeFloat: 22,
  TypeVector: 23,
  TypeArray: 28,
  TypeRuntimeArray: 29,
  TypeStruct: 30,
  TypePointer: 32,
  TypeFunction: 33,
  ConstantTrue: 41,
  ConstantFalse: 42,
  Constant: 43,
  ConstantComposite: 44,
  Function: 54,
  FunctionEnd: 56,
  Variable: 59,
  Load: 61,
  Store: 62,
  AccessChain: 65,
  Decorate: 71,
  MemberDecorate: 72,
  VectorExtractDynamic: 77,
  CompositeConstruct: 80,
  CompositeExtract: 81,
  ConvertFToU: 109,
  ConvertFToS: 110,
  ConvertSToF: 111,
  ConvertUToF: 112,
  UConvert: 113,
  SConvert: 114,
  FConvert: 115,
  Bitcast: 124,
  SNegate: 126,
  FNegate: 127,
  IAdd: 128,
  FAdd: 129,
  ISub: 130,
  FSub: 131,
  IMul: 132,
  FMul: 133,
  UDiv: 134,
  SDiv: 135,
  FDiv: 136,
  UMod: 137,
  SRem: 138,
  SMod: 139,
  FRem: 140,
  LogicalEqual: 164,
  LogicalNotEqual: 165,
  LogicalOr: 166,
  LogicalAnd: 167,
  LogicalNot: 168,
  Select: 169,
  IEqual: 170,
  INotEqual: 171,
  UGreaterThan: 172,
  SGreaterThan: 173,
  UGreaterThanEqual: 174,
  SGreaterThanEqual: 175,
  ULessThan: 176,
  SLessThan: 177,
  ULessThanEqual: 178,
  SLessThanEqual: 179,
  FOrdEqual: 180,
  FUnordNotEqual: 183,
  FOrdLessThan: 184,
  FOrdGreaterThan: 186,
  FOrdLessThanEqual: 188,
  FOrdGreaterThanEqual: 190,
  ShiftRightLogical: 194,
  ShiftRightArithmetic: 195,
  ShiftLeftLogical: 196,
  BitwiseOr: 197,
  BitwiseXor: 198,
  BitwiseAnd: 199,
  Not: 200,
  BitFieldSExtract: 202,
  BitFieldUExtract: 203,
  ControlBarrier: 224,
  AtomicIAdd: 234,
  AtomicAnd: 240,
  AtomicOr: 241,
  LoopMerge: 246,
  SelectionMerge: 247,
  Label: 248,
  Branch: 249,
  BranchConditional: 250,
  Return: 253,
  Unreachable: 255,
  GroupNonUniformShuffle: 345,
  GroupNonUniformShuffleXor: 346,
  GroupNonUniformShuffleDown: 348,
  GroupNonUniformIAdd: 349,
  GroupNonUniformFAdd: 350,
  GroupNonUniformSMin: 353,
  GroupNonUniformUMin: 354,
  GroupNonUniformFMin: 355,
  GroupNonUniformSMax: 356,
  GroupNonUniformUMax: 357,
  GroupNonUniformFMax: 358,
  /** OpSDot (SPIR-V 1.6; OpSDotKHR of SPV_KHR_integer_dot_product before it, the same number). */
  SDot: 4450,
  TypeCooperativeMatrixKHR: 4456,
  CooperativeMatrixLoadKHR: 4457,
  CooperativeMatrixStoreKHR: 4458,
  CooperativeMatrixMulAddKHR: 4459,
} as const;

/** OpTypeCooperativeMatrixKHR's Use operand and the load/store MemoryLayout operand (SPV_KHR_cooperative_matrix). */
export const MatrixUse = { A: 0, B: 1, Accumulator: 2 } as const;
export const MatrixLayout = { RowMajor: 0, ColumnMajor: 1 } as const;
/** OpTypeFloat's FP Encoding operand for bfloat16 (SPV_KHR_bfloat16). */
export const FPEncodingBFloat16 = 0;

/** OpSDot's packed-vector-format operand: each 32-bit operand holds four 8-bit components. */
export const PackedVectorFormat4x8Bit = 0;

/** GLSL.std.450 extended instructions. */
export const GLSL = {
  RoundEven: 2,
  FAbs: 4,
  SAbs: 5,
  Floor: 8,
  Ceil: 9,
  Pow: 26,
  Sqrt: 31,
  InverseSqrt: 32,
  FMin: 37,
  UMin: 38,
  SMin: 39,
  FMax: 40,
  UMax: 41,
  SMax: 42,
  Fma: 50,
  FindUMsb: 75,
} as const;

export const Cap = {
  Shader: 1,
  Float16: 9,
  GroupNonUniform: 61,
  GroupNonUniformArithmetic: 63,
  GroupNonUniformShuffle: 65,
  GroupNonUniformShuffleRelative: 66,
  StorageBuffer16BitAccess: 4433,
  StorageBuffer8BitAccess: 4448,
  DotProductInput4x8BitPacked: 6018,
  DotProduct: 6019,
  BFloat16TypeKHR: 5116,
  BFloat16CooperativeMatrixKHR: 5118,
  VulkanMemoryModel: 5345,
  VulkanMemoryModelDeviceScope: 5346,
  CooperativeMatrixKHR: 6022,
} as const;

export const Dec = {
  Block: 2,
  ArrayStride: 6,
  BuiltIn: 11,
  Restrict: 19,
  Aliased: 20,
  Coherent: 23,
  NonWritable: 24,
  NonReadable: 25,
  Binding: 33,
  DescriptorSet: 34,
  Offset: 35,
  NoContraction: 42,
} as const;

export const BuiltIn = {
  NumWorkgroups: 24,
  WorkgroupId: 26,
  LocalInvocationId: 27,
  GlobalInvocationId: 28,
  SubgroupSize: 36,
  SubgroupId: 40,
  SubgroupLocalInvocationId: 41,
} as const;

export const Storage = {
  Input: 1,
  Workgroup: 4,
  Function: 7,
  StorageBuffer: 12,
} as const;

export const ExecutionModelGLCompute = 5;
export const AddressingLogical = 0;
export const MemoryModelGLSL450 = 1;
/** The Vulkan memory model (SPV_KHR_vulkan_memory_model), which cooperative matrices require. */
export const MemoryModelVulkan = 3;
export const ExecutionModeLocalSize = 17;

export const Scope = { Device: 1, Workgroup: 2, Subgroup: 3 } as const;
export const Semantics = {
  Relaxed: 0,
  AcquireRelease: 0x8,
  UniformMemory: 0x40,
  WorkgroupMemory: 0x100,
} as const;
export const GroupOperationReduce = 0;
export const LoopControl = { None: 0, Unroll: 1, DontUnroll: 2 } as const;
